(function(root) {
  if (root.nmBokehReady && root.Bokeh) return;
  const version = __VERSION__;
  if (root.Bokeh && root.Bokeh.version === version) { root.nmBokehReady = Promise.resolve(); return; }
  const bin = atob("__PACKED__"), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
  root.nmBokehReady = new Response(stream).text().then(function(text) {
    if (root.Bokeh && root.Bokeh.version === version) return;
    const s = document.createElement("script");
    s.text = text;
    document.head.appendChild(s);
  }).catch(function(e) { console.error("nsight-magic: could not load BokehJS", e); throw e; });
})(window);
