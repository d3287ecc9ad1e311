/* The extension's styles, added to the page by the plugin: kept in code so that the build bundles no CSS loader. */

const CSS = `
/* nsight-magic: the "Nsight profiles" sidebar and the profile viewer */

.nm-profiles {
  display: flex;
  flex-direction: column;
  background: var(--jp-layout-color1);
  color: var(--jp-ui-font-color1);
  font-size: var(--jp-ui-font-size1);
  min-width: 220px;
}

.nm-profiles-header {
  display: flex;
  align-items: center;
  gap: 6px;
  padding: 6px 8px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
}

.nm-profiles-title {
  flex: 1;
  font-weight: 600;
  text-transform: uppercase;
  font-size: var(--jp-ui-font-size0);
  letter-spacing: 0.05em;
}

.nm-profiles-where {
  padding: 4px 8px;
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
  word-break: break-all;
}

.nm-profiles-list {
  flex: 1;
  overflow-y: auto;
  margin: 0;
  padding: 0;
  list-style: none;
}

.nm-profile {
  padding: 6px 8px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color3);
  cursor: pointer;
}

.nm-profile:hover {
  background: var(--jp-layout-color2);
}

.nm-profile-name {
  font-weight: 600;
  word-break: break-all;
}

.nm-profile-meta,
.nm-profile-top {
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
  white-space: nowrap;
  overflow: hidden;
  text-overflow: ellipsis;
}

.nm-profile-head {
  display: flex;
  align-items: center;
  gap: 4px;
}

.nm-profile-pick {
  margin: 0;
}

.nm-profile-loading,
.nm-profile-interrupted,
.nm-profile-failed {
  opacity: 0.7;
  font-style: italic;
}

.nm-profile-top.nm-profile-state {
  white-space: normal;
}

.nm-profiles-compare:disabled {
  opacity: 0.4;
}

/* a profile's view in a notebook (labextension/src/output.ts): the live widget fills the timeline's width */
.nm-output .nm-live {
  width: 100%;
}

.nm-output .nm-live-slot.nm-live-on > :not(.nm-live),
.nm-output.nm-is-live .nm-live-slot > :not(.nm-live) {
  display: none !important;
}

.nm-profiles-empty {
  padding: 12px 8px;
  color: var(--jp-ui-font-color2);
}

.nm-viewer iframe {
  width: 100%;
  height: 100%;
  border: none;
  background: white;
}
`;

/** Add the styles to the document once. */
export function addStyles(doc: Document = document): void {
  if (doc.getElementById('nsight-magic-styles')) {
    return;
  }
  const el = doc.createElement('style');
  el.id = 'nsight-magic-styles';
  el.textContent = CSS;
  doc.head.appendChild(el);
}
