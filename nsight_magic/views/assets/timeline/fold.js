const sel = rows.selected.indices;
if (sel.length == 0) return;
const k = sel[0];
rows.selected.indices = [];
const R = rows.data;
if (!R.group[k]) return;
const n = R.key.length, folded = R.folded.slice();
folded[k] = !folded[k];
const closed = new Set(R.key.filter((_, i) => folded[i]));
const y = new Array(n), strip = new Array(n), yOf = {}; let next = 0;
for (let i = 0; i < n; i++) {
  const anc = R.anc[i] ? R.anc[i].split('|') : [];
  y[i] = anc.some(a => closed.has(a)) ? NaN : next++;
  yOf[R.key[i]] = y[i];
}
for (let i = 0; i < n; i++) {  // a folded group draws its children's activity as one strip on its header
  const anc = R.anc[i] ? R.anc[i].split('|') : [], outer = anc.find(a => closed.has(a));
  strip[i] = outer === undefined ? y[i] : yOf[outer];
}
const text = R.label.map((l, i) => (R.group[i] ? (folded[i] ? '▸ ' : '▾ ') : '') + l);
rows.data = Object.assign({}, R, {folded: folded, y: y, strip: strip, text: text});
for (const r of plot.renderers) {  // every source with rows gets new y (the bar labels follow the events')
  const src = r.data_source;
  if (!src || !src.data || !('row' in src.data) || !('y' in src.data)) continue;
  src.data = Object.assign({}, src.data, {y: Array.from(src.data.row, w => strip[w])});
}
const nv = Math.max(next, 1);
plot.y_range.setv({start: nv - 0.5, end: -0.5});
band.top = nv - 0.5;
const h = Math.min(Math.max(90 + 22 * nv, 200), 1600);
plot.height = h; labels.height = h;
