"""GPU metrics workload: a compute-bound stretch (bf16 GEMMs) then a memory-bound one (large copies), each in an
NVTX range; recorded with `nsys profile -t cuda,nvtx --gpu-metrics-devices=all`."""
import time
import nvtx
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
x = torch.empty(512 * 2**20 // 4, device="cuda")
torch.cuda.synchronize()
with nvtx.annotate("compute"):
    for _ in range(40):
        c = a @ b
    torch.cuda.synchronize()
with nvtx.annotate("memory"):
    for _ in range(40):
        y = x.clone()
    torch.cuda.synchronize()
with nvtx.annotate("idle"):
    time.sleep(0.2)
print("done")
