#!/bin/bash
# A lent GPU's measurements in one `device` call (../shared/reference/GPU.md): install the carried wheels into the
# machine's own Python, then the video, request and profile benchmarks, each under its own time limit, each log
# under $OUT as it goes (what finished comes back even when the lease ends mid-run). Run from the repo root:
#   device run: bash benchmarks/gpu_session.sh     (carry: [".whl"], the wheels GPU.md lists)
# Limits in seconds: VIDEO_S (default 240), REQUESTS_S (90), PROFILE_S (120); TASKS (pose,seg,normal,pointmap),
# PROFILE_TASKS (pose,seg). A fresh machine costs 1-2 minutes to start and every full-size model compiles once.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_session}; mkdir -p "$OUT"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl > "$OUT/install.txt" 2>&1 \
    || { echo "install failed"; tail -20 "$OUT/install.txt"; exit 1; }
fi
export HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False SAPIENS2_COMPILE=on PYTHONPATH=$PWD
nvidia-smi -L; nproc
run() {  # name, limit, command...: the log under $OUT, its tail here
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -v "Loading weights\|Writing model\|^wrote " "$OUT/$name.txt" | tail -"${TAIL:-40}"
}
run video "${VIDEO_S:-240}" python3 benchmarks/bench_video.py --device cuda --fullsize --frames 96 \
  --tasks "${TASKS:-pose,seg,normal,pointmap}" --no-sequential --breakdown
run requests "${REQUESTS_S:-90}" python3 benchmarks/bench_gpu.py --device cuda --sizes full --compile --skip-app \
  --skip-video --tasks pose --repeat 3 --forward-repeat 5
run profile "${PROFILE_S:-120}" python3 benchmarks/profile_video.py --device cuda --fullsize \
  --tasks "${PROFILE_TASKS:-pose,seg}"
