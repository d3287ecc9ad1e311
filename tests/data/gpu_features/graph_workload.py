"""CUDA graph workload: a small MLP's forward captured in a torch.cuda.CUDAGraph and replayed 20 times, each replay
in an NVTX range; recorded with --cuda-graph-trace=graph (nsys's default) and =node."""
import sys
import time
import nvtx
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(1024, 1024), torch.nn.GELU())]).cuda()
static_x = torch.randn(64, 1024, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    for _ in range(3):
        model(static_x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(g):
    static_y = model(static_x)
torch.cuda.synchronize()
t0 = time.perf_counter()
for i in range(20):
    with nvtx.annotate(f"replay {i}"):
        g.replay()
torch.cuda.synchronize()
print("replays_s", time.perf_counter() - t0)
