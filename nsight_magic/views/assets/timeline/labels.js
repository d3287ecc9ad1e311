const d = src.data, n = d.left.length;
const x0 = plot.x_range.start, x1 = plot.x_range.end;
const w = plot.inner_width > 0 ? plot.inner_width : plot.width;
const px = w / Math.max(x1 - x0, 1e-12);
const X = [], Y = [], T = [], C = [];
const taken = new Map();  // row y -> where its last label ends: bars that overlap in a row (streams drawn together)
for (let i = 0; i < n && X.length < max_labels; i++) {
  if (!isFinite(d.y[i]) || d.right[i] < x0 || d.left[i] > x1) continue;
  const l = Math.max(d.left[i], x0), r = Math.min(d.right[i], x1);
  const room = (r - l) * px - 6;
  if (room < 24 || l < (taken.get(d.y[i]) ?? -Infinity)) continue;
  const name = String((names instanceof Map ? names.get(String(d.name[i])) : names[d.name[i]]) || '');
  const fit = Math.floor(room / char_px);
  if (fit < 3) continue;
  const text = name.length <= fit ? name : name.slice(0, fit - 1) + '…';
  X.push(l + 3 / px); Y.push(d.y[i]); T.push(text);
  C.push(text_color[d.color[i]] || '#111111');
  taken.set(d.y[i], l + (text.length * char_px + 6) / px);
}
labels.data = {x: X, y: Y, text: T, tcol: C};
