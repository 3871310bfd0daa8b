#!/bin/bash
# A lent GPU's measurements in one `device` call (../shared/reference/GPU.md): install the carried wheels into the
# machine's own Python, then the request and video benchmarks (python -m benchmarks gpu / video), each under its own
# time limit, each log under $OUT as it goes and the results files copied there (what finished comes back even when
# the lease ends mid-run). Run from the repo root:
#   device run: bash benchmarks/gpu_session.sh     (carry: [".whl"], the wheels GPU.md lists)
# Limits in seconds: REQUESTS_S (default 200), VIDEO_S (220), REQUESTS_PROFILE_S (50: cProfile of one request a task on the
# tiny checkpoints, the host's work being the same); REQUEST_TASKS and TASKS (pose,seg,normal,pointmap). A fresh machine costs 1-2 minutes to start and every full-size model compiles once.
# A dry run here, before a lease (every command's flags and plumbing, on tiny checkpoints, a minute or two):
#   INSTALL=0 PY=.venv/bin/python DEVICE=cpu FULL=0 FRAMES=8 bash benchmarks/gpu_session.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_session}; mkdir -p "$OUT"
PY=${PY:-python3}  # the lent machine's Python; here: PY=.venv/bin/python
if [ "${INSTALL:-1}" = 1 ] && ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl > "$OUT/install.txt" 2>&1 \
    || { echo "install failed"; tail -20 "$OUT/install.txt"; exit 1; }
fi
export HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False SAPIENS2_COMPILE=on PYTHONPATH=$PWD
DEVICE=${DEVICE:-cuda}; FRAMES=${FRAMES:-96}
if [ "${FULL:-1}" = 1 ]; then FULLSIZE=--fullsize; SIZES=full; else FULLSIZE=; SIZES=tiny; fi
command -v nvidia-smi > /dev/null && nvidia-smi -L; nproc
run() {  # name, limit, command...: the log under $OUT, its tail here
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -v "Loading weights\|Writing model\|^wrote " "$OUT/$name.txt" | tail -"${TAIL:-40}"
}
run requests "${REQUESTS_S:-200}" $PY -m benchmarks gpu --device "$DEVICE" --sizes "$SIZES" --compile --skip-app \
  --skip-video --tasks "${REQUEST_TASKS:-pose,seg,normal,pointmap}" --batches 1 --repeat 3 --forward-repeat 5
run video "${VIDEO_S:-220}" $PY -m benchmarks video --device "$DEVICE" $FULLSIZE --frames "$FRAMES" \
  --tasks "${TASKS:-pose,seg,normal,pointmap}" --no-sequential --breakdown
run requests_profile "${REQUESTS_PROFILE_S:-50}" $PY -m benchmarks gpu --device "$DEVICE" --sizes tiny --profile \
  --tasks "${REQUEST_TASKS:-pose,seg,normal,pointmap}"
cp benchmarks/results/*.json "$OUT/" 2> /dev/null || true
