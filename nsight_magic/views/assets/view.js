/* nsight-magic: what a profile's view does in the browser (view.html, saved notebooks, nbconvert pages and the
 * JupyterLab renderer).  Loaded once per page; every view's own script then calls nmView.setup(root) for its
 * root element.
 *
 * Without scripts (an untrusted notebook, a static renderer) a view is plain HTML: its sections are <details>
 * (Timeline open), the timeline a picture, a line saying how to make it interactive.  setup() turns it into tabs,
 * removes that line, shows the filter boxes; the plot's own script hides the picture once Bokeh has drawn.
 *
 * Names are the user's (kernels, NVTX ranges): always set as text, never as markup. */
(function () {
  if (window.nmView) return;

  function plotModels(name) {
    // every Bokeh document of the page: static pages (embed_items) and live views (jupyter_bokeh) alike
    const out = [];
    if (!window.Bokeh) return out;
    const docs = new Set(Bokeh.documents || []);
    try {
      for (const v of (Bokeh.index && Bokeh.index.roots) || []) if (v.model && v.model.document) docs.add(v.model.document);
    } catch (e) { /* an older BokehJS: its documents are enough */ }
    for (const doc of docs) {
      const m = doc.get_model_by_name(name);
      if (m) out.push([doc, m]);
    }
    return out;
  }

  function showTab(root, i) {
    root.querySelectorAll(':scope > .nm-tabs > .nm-tabbtn').forEach(b => b.classList.toggle('nm-on', b.dataset.tab === String(i)));
    root.querySelectorAll(':scope > .nm-pane').forEach((p, j) => { p.style.display = j === Number(i) ? '' : 'none'; });
  }

  function zoom(root, plot, t0, t1, bands) {
    const pad = Math.max((t1 - t0) * 0.05, 1e-3);
    for (const [doc, p] of plotModels(plot)) {
      p.x_range.setv({start: t0 - pad, end: t1 + pad});
      if (bands) {
        const src = doc.get_model_by_name(plot + '-bands');
        if (src) src.data = {left: bands.map(b => b[0]), right: bands.map(b => b[1])};
      }
    }
    if (root) showTab(root, 0);
  }

  function rows(t) { return Array.from(t.tBodies[0].rows); }

  function sortBy(th) {
    const t = th.closest('table'), col = th.cellIndex, num = th.dataset.num === '1';
    const dir = th.dataset.dir === 'desc' ? 'asc' : 'desc';
    t.querySelectorAll('th').forEach(h => { if (h !== th) delete h.dataset.dir; });
    th.dataset.dir = dir;
    const key = r => { const v = r.cells[col].dataset.v; return num ? (v === '' ? -Infinity : parseFloat(v)) : v; };
    const sorted = rows(t).sort((a, b) => {
      const x = key(a), y = key(b), c = x < y ? -1 : x > y ? 1 : 0;
      return dir === 'asc' ? c : -c;
    });
    const body = t.tBodies[0];
    sorted.forEach(r => body.appendChild(r));
  }

  function step(root, plot, spans, i, label) {
    const [t0, t1] = spans[i];
    zoom(root, plot, t0, t1, null);
    if (!root) return;
    const pane = root.querySelector(':scope > .nm-pane');
    let st = root.querySelector('.nm-stepper');
    if (!st && pane) {
      st = document.createElement('div');
      st.className = 'nm-stepper';
      st.innerHTML = '<span class="nm-step" data-d="-1" title="previous instance">&#9664;</span> ' +
        '<span class="nm-what"></span> <span class="nm-pos"></span> ' +
        '<span class="nm-step" data-d="1" title="next instance">&#9654;</span>';
      pane.insertBefore(st, pane.querySelector('.nm-live-slot') || pane.firstChild);
    }
    if (st) {
      Object.assign(st.dataset, {spans: JSON.stringify(spans), i: String(i), plot: plot, label: label});
      st.querySelector('.nm-what').textContent = label;
      st.querySelector('.nm-pos').textContent = `${i + 1}/${spans.length}`;
      st.style.display = spans.length > 1 ? '' : 'none';
    }
    root.querySelectorAll('td.nm-zoom').forEach(c => {  // the name's cell keeps the same position
      if (!c.childNodes[0] || c.childNodes[0].textContent !== label) return;
      c.dataset.i = String(i);
      const pos = c.querySelector('.nm-pos');
      if (pos) pos.textContent = `${i + 1}/${spans.length}`;
    });
  }

  document.addEventListener('click', function (ev) {
    const target = ev.target instanceof Element ? ev.target : null;
    if (!target) return;
    const th = target.closest('table.nm-table th');
    if (th) { sortBy(th); return; }
    const tab = target.closest('.nm-tabbtn');
    if (tab) { showTab(tab.closest('.nm-report'), tab.dataset.tab); return; }
    const finding = target.closest('.nm-finding[data-t0]');
    if (finding) {
      zoom(finding.closest('.nm-report'), finding.dataset.plot, parseFloat(finding.dataset.t0),
           parseFloat(finding.dataset.t1), JSON.parse(finding.dataset.bands || '[]'));
      return;
    }
    // a name zooms the timeline to its first instance; the stepper above the timeline (and the arrows in the
    // cell) go to the previous / next one
    const stepper = target.closest('.nm-stepper .nm-step');
    const td = stepper ? null : target.closest('table.nm-table td.nm-zoom');
    if (!td && !stepper) return;
    const src = td || stepper.closest('.nm-stepper');
    const spans = JSON.parse(src.dataset.spans || '[]'), arrow = target.closest('.nm-step');
    if (!spans.length) return;
    const i = arrow ? (parseInt(src.dataset.i || '0') + parseInt(arrow.dataset.d) + spans.length) % spans.length : 0;
    const root = src.closest('.nm-report'), plot = src.dataset.plot || src.closest('table').dataset.plot;
    step(root, plot, spans, i, src.dataset.label || (td ? td.childNodes[0].textContent : ''));
  });

  document.addEventListener('input', function (ev) {
    const inp = ev.target instanceof Element ? ev.target.closest('input.nm-filter') : null;
    if (!inp) return;
    const scope = inp.closest('.nm-report') || document;
    const t = scope.querySelector(`table[data-filter-id="${CSS.escape(inp.dataset.table)}"]`);
    if (!t) return;
    const q = inp.value.toLowerCase();
    rows(t).forEach(r => { r.style.display = r.textContent.toLowerCase().includes(q) ? '' : 'none'; });
  });

  window.nmView = {
    version: 1,
    /** Turn a view's plain-HTML form into the interactive one (once per root). */
    setup(root) {
      if (!root || root.dataset.nmReady) return;
      root.dataset.nmReady = '1';
      root.querySelectorAll('.nm-noscript').forEach(e => e.remove());
      root.querySelectorAll('input.nm-filter').forEach(e => { e.style.display = ''; e.disabled = false; });
      const strip = root.querySelector(':scope > .nm-tabs');
      if (strip) {
        strip.style.display = '';
        root.querySelectorAll(':scope > details.nm-pane').forEach(p => {
          p.open = true;
          const s = p.querySelector(':scope > summary');
          if (s) s.hidden = true;
        });
        showTab(root, 0);
      }
    },
    /** After a plot is drawn: the picture that stood for it goes. */
    drawn(root) {
      if (root) root.querySelectorAll('.nm-picture').forEach(e => { e.style.display = 'none'; });
    },
    zoom: zoom,
    plotModels: plotModels
  };
})();
