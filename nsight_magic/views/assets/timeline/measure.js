const g = cb_obj.geometry;
if (g.x0 === undefined || g.x1 === undefined) return;
const a = Math.min(g.x0, g.x1), b = Math.max(g.x0, g.x1), ms = b - a;
box.left = a; box.right = b; box.visible = true;
const txt = ms >= 1000 ? (ms / 1000).toFixed(3) + ' s' : ms >= 1 ? ms.toFixed(3) + ' ms' : (ms * 1000).toFixed(3) + ' µs';
label.x = a; label.text = 'Δ ' + txt + '  (' + a.toFixed(3) + ' – ' + b.toFixed(3) + ' ms)'; label.visible = true;
