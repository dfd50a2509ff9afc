#!/usr/bin/env bash
# The Python package on a GPU machine without Rust: installs a wheel built
# here (`pip wheel ./python -w .whl`, carried in `.whl/`), then runs the
# GPU test suite (the emulated CPU variants of test_hf.py skipped: the GPU
# ones run) and the benchmarks, logs under $OUT (or ./logs). One call of
# the device tool carries `.whl` (the wheel is ~5 MB; a bundle fits beside it).
# Usage: bash python/device-run.sh [tests] [bench] [hf]   (default: all three)
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=${OUT:-$here/../logs}; mkdir -p "$logs"
steps=${*:-tests bench hf}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --upgrade --no-deps --no-index --target /tmp/da-site "$here"/../.whl/decode_attn-*.whl || exit 1
export PYTHONPATH=/tmp/da-site
status=0
for s in $steps; do
  case $s in
    tests) (cd "$here/tests" && DECODE_ATTN_REPORT="$logs/report.jsonl" python3 -m pytest -v -p no:cacheprovider -rfE -k "not emulated" ${PYTEST_ARGS:-} test_cpu.py test_gpu.py test_hf.py) > "$logs/pytest.log" 2>&1 || status=1
           tail -n 3 "$logs/pytest.log" ;;
    bench) (cd /tmp && python3 -m decode_attn.bench --json "$logs/bench.json" ${BENCH_ARGS:-}) > "$logs/bench.log" 2>&1 || status=1
           tail -n 14 "$logs/bench.log" ;;
    hf) (cd /tmp && python3 -m decode_attn.bench --hf --json "$logs/bench-hf.json" ${HF_ARGS:-}) > "$logs/bench-hf.log" 2>&1 || status=1
        tail -n 30 "$logs/bench-hf.log" ;;
    *) echo "device-run.sh: unknown step $s"; exit 2 ;;
  esac
done
exit $status
