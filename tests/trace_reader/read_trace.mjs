// Reads a Trace Event JSON file (.json or .json.gz) with Chrome DevTools' trace engine and prints what it found:
// per process its threads (name, number of events), the flows it bound, the trace's bounds.
import {analyzeTrace} from '@paulirish/trace_engine/analyze-trace.mjs';

const {parsedTrace} = await analyzeTrace(process.argv[2]);
const d = parsedTrace.data;
const out = {processes: {}, flows: d.Flows.flows.length, bounds: d.Meta.traceBounds};
for (const [pid, p] of d.Renderer.processes) {
  const threads = {};
  for (const [tid, t] of p.threads) {
    threads[tid] = {name: t.name, entries: t.entries.length};
  }
  out.processes[pid] = {name: p.name ?? null, threads};
}
console.log(JSON.stringify(out));
