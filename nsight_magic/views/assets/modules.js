(function () {
  if (window.nmModulesJs) return; window.nmModulesJs = true;
  const kids = (t, path) => [...t.tBodies[0].rows].filter(r => r.dataset.parent === path);
  const hide = (t, path, h) => kids(t, path).forEach(r => { r.style.display = h ? 'none' : '';
    if (!h && r.dataset.closed === '1') return; hide(t, r.dataset.path, h); });
  document.addEventListener('click', function (ev) {
    const tog = ev.target.closest('table.nm-tree .nm-tog');
    if (tog) { const r = tog.closest('tr'), t = r.closest('table'), closed = r.dataset.closed !== '1';
      r.dataset.closed = closed ? '1' : '0'; tog.textContent = closed ? '▸' : '▾'; hide(t, r.dataset.path, closed);
      return; }
    const th = ev.target.closest('table.nm-tree th'); if (!th) return;
    const t = th.closest('table'), col = th.cellIndex, dir = th.dataset.dir === 'desc' ? 'asc' : 'desc';
    th.dataset.dir = dir;
    const body = t.tBodies[0];
    const key = r => { const v = r.cells[col].dataset.v; return col === 0 ? v : parseFloat(v); };
    const place = path => { const ks = kids(t, path).sort((a, b) => { const x = key(a), y = key(b);
      const c = x < y ? -1 : x > y ? 1 : 0; return dir === 'asc' ? c : -c; });
      ks.forEach(r => { body.appendChild(r); place(r.dataset.path); }); };
    place('');
  });
})();
