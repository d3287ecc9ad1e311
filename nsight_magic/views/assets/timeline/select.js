const hl_empty = {left: [], right: [], row: [], y: []};
const idx = src.selected.indices;
if (idx.length == 0) { hl.data = hl_empty; return; }
const d = src.data, n = d.left.length, i = idx[0];
const links = new Set();
if (d.cat[i] == nvtx_cat) {
  const ar = api_row[d.row[i]];
  const t0 = d.left[i], t1 = d.left[i] + d.dur_us[i] / 1e3;
  if (ar >= 0) for (let j = 0; j < n; j++)
    if (d.row[j] == ar && d.left[j] >= t0 && d.left[j] <= t1 && d.link[j] >= 0) links.add(d.link[j]);
} else if (d.link[i] >= 0) {
  links.add(d.link[i]);
}
const L = [], R = [], W = [], Y = [];
for (let j = 0; j < n; j++)
  if (j != i && links.has(d.link[j]) && (d.cat[j] == kernel_cat || d.cat[i] == kernel_cat)) {
    L.push(d.left[j]); R.push(d.right[j]); W.push(d.row[j]); Y.push(d.y[j]);
  }
hl.data = {left: L, right: R, row: W, y: Y};
note.text = links.size ? ('highlighted ' + L.length + ' launched event(s)') : '';
