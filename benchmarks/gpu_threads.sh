#!/bin/bash
# Where a video's threads wait on a lent GPU, in one `device` call (carry [".whl"], with py-spy's wheel among them):
# the body-part video at full size with Python's GIL switch interval at its default and at 0.5 ms, then under py-spy
# twice (--gil: which thread holds the GIL; --idle: where every thread is, waiting included), each summarised by
# benchmarks/spy_summary.py and the raw samples gzipped under $OUT. About four minutes on an H200.
#   device run: bash benchmarks/gpu_threads.sh
# A dry run here first (flags and plumbing, tiny checkpoints on the CPU, a minute):
#   INSTALL=0 PY=.venv/bin/python DEVICE=cpu FULL=0 FRAMES=8 bash benchmarks/gpu_threads.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_threads}; mkdir -p "$OUT"
PY=${PY:-python3}
if [ "${INSTALL:-1}" = 1 ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl > "$OUT/install.txt" 2>&1 \
    || { echo "install failed"; tail "$OUT/install.txt"; exit 1; }
fi
export HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False SAPIENS2_COMPILE=${SAPIENS2_COMPILE:-on} PYTHONPATH=$PWD
SPY=$($PY -c "import sysconfig; print(sysconfig.get_path('scripts'))")/py-spy
if [ "${FULL:-1}" = 1 ]; then FULLSIZE=--fullsize; else FULLSIZE=; fi
V="$PY benchmarks/bench_video.py --device ${DEVICE:-cuda} $FULLSIZE --frames ${FRAMES:-96} --tasks ${TASK:-seg} --no-sequential --breakdown"
show() { grep -v "Loading\|Writing\|^wrote\|Warn\|warn_once" "$1" | grep -E "^(seg|pose|normal|pointmap) |forward|encode|switch|wall" | cut -c1-170; }
timeout 90 $V > "$OUT/default.txt" 2>&1; echo "== switch interval 5 ms (default) rc=$?"; show "$OUT/default.txt"
timeout 80 $V --switch-interval 0.0005 > "$OUT/short.txt" 2>&1; echo "== switch interval 0.5 ms rc=$?"; show "$OUT/short.txt"
for mode in gil idle; do
  timeout 80 "$SPY" record --$mode --threads --format raw -r 100 -o "$OUT/spy_$mode.txt" -- $V --no-model-only \
    > "$OUT/spy_$mode.log" 2>&1
  echo "== py-spy --$mode rc=$?"
  $PY benchmarks/spy_summary.py "$OUT/spy_$mode.txt" --within timed_ours --top 10 --chain 3 > "$OUT/spy_$mode.summary.txt"
  head -45 "$OUT/spy_$mode.summary.txt" | cut -c1-200
  gzip -f "$OUT/spy_$mode.txt"
done
