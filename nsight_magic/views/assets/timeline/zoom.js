if (all._nm_init === undefined) all._nm_init = {exact: exact.data, agg: agg.data, caption: plot.title.text};
const init = all._nm_init, strip = rows.data.strip;
const x0 = plot.x_range.start, x1 = plot.x_range.end;
const withY = (d) => Object.assign({}, d, {y: Array.from(d.row, w => strip[w])});
const inWin = (d) => { const out = []; for (let i = 0; i < d.left.length; i++)
  if (d.right[i] >= x0 && d.left[i] <= x1) out.push(i); return out; };
const a = inWin(all.data), f = inWin(init.exact);
if (a.length + f.length > budget) {
  if (all._nm_zoomed) { all._nm_zoomed = false; exact.data = withY(init.exact); agg.data = withY(init.agg);
                        plot.title.text = init.caption; }
  return;
}
all._nm_zoomed = true;
const minw = (x1 - x0) / Math.max(plot.inner_width || width, 1);
const cols = ['left', 'right', 'row', 'cat', 'name', 'detail', 'color', 'bytes', 'link'], out = {};
for (const c of cols) out[c] = [];
out.dur_us = [];
for (const [d, idx] of [[init.exact, f], [all.data, a]]) for (const i of idx) {
  for (const c of cols) out[c].push(d[c][i]);
  const n = out.left.length - 1;
  out.dur_us.push('dur_us' in d ? d.dur_us[i] : (d.right[i] - d.left[i]) * 1e3);
  out.right[n] = Math.max(out.right[n], out.left[n] + minw);
}
out.y = out.row.map(w => strip[w]);
const keep = new Set(embedded), A = init.agg, bins = {};
for (const c of Object.keys(A)) bins[c] = [];
for (let i = 0; i < A.left.length; i++) if (!keep.has(A.row[i]) || A.count[i] < 0)
  for (const c of Object.keys(A)) bins[c].push(A[c][i]);
agg.data = withY(bins);
exact.data = out;
const n = out.left.length;
plot.title.text = (n === 1 ? 'the one event' : n.toLocaleString() + ' events') + ' in view, exact' +
  (partial ? '; busiest rows binned (exact live: %nsys_load)' : '');
