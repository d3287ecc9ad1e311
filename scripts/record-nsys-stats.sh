#!/usr/bin/env bash
# Record what the installed nsys prints for Nsight Systems exports: `nsys stats` (CSV) for the reports our
# summaries mirror and `nsys analyze` (CSV) for the rules our findings mirror.  Used to make the expected outputs
# in tests/data/nsys-stats-<version>/ (the lent GPU has nsys 2025.3; this machine Debian's 2022.4).
#   bash scripts/record-nsys-stats.sh OUTDIR FILE.sqlite...
# Each FILE gets OUTDIR/<stem>/<report>.csv (the stats output as nsys printed it) and a log of failures.
set -uo pipefail
out=$1; shift
mkdir -p "$out"
ver=$(nsys --version | grep -Eo '[0-9]{4}\.[0-9.]+' | head -n 1)
major=${ver%%.*}
if [ "$major" -ge 2024 ]; then
  reports="cuda_gpu_kern_sum cuda_gpu_mem_time_sum cuda_gpu_mem_size_sum cuda_api_sum nvtx_sum nvtx_gpu_proj_sum osrt_sum"
  rules="cuda_memcpy_async cuda_memcpy_sync cuda_memset_sync cuda_api_sync gpu_gaps gpu_time_util"
else
  reports="gpukernsum gpumemtimesum gpumemsizesum cudaapisum nvtxsum nvtxgpuproj osrtsum"
  rules="cuda-async-memcpy cuda-sync-memcpy cuda-sync-memset cuda-sync-api gpu-starv gpu-low-util"
fi
echo "$ver" > "$out/nsys-version.txt"
for f in "$@"; do
  stem=$(basename "$f" .sqlite)
  d="$out/$stem"; mkdir -p "$d"
  tmp=$(mktemp -d); cp "$f" "$tmp/$stem.sqlite"   # nsys may touch the file; keep the original as it is
  for r in $reports; do
    timeout 300 nsys stats --report "$r" --format csv --output - "$tmp/$stem.sqlite" > "$d/$r.csv" 2>> "$d/log.txt" \
      || echo "stats $r: exit $?" >> "$d/log.txt"
  done
  for r in $rules; do
    timeout 300 nsys analyze --rule "$r" --format csv --output - "$tmp/$stem.sqlite" > "$d/$r.csv" 2>> "$d/log.txt" \
      || echo "analyze $r: exit $?" >> "$d/log.txt"
  done
  rm -rf "$tmp"
done
