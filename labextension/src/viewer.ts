/**
 * A saved profile's view.html in a Lab tab.  The page is self-contained (BokehJS inline), so it is loaded as the
 * iframe's srcdoc with `sandbox="allow-scripts"` and no `allow-same-origin`: its scripts run in an opaque origin
 * and can reach neither the Lab's DOM, nor its cookies, nor the server API.
 */
import { Widget } from '@lumino/widgets';

export class ProfileViewer extends Widget {
  constructor(name: string) {
    super();
    this.addClass('nm-viewer');
    this.title.label = name;
    this.title.caption = `Nsight profile ${name}`;
    this.title.closable = true;
    this.iframe = document.createElement('iframe');
    this.iframe.setAttribute('sandbox', 'allow-scripts');
    this.iframe.setAttribute('referrerpolicy', 'no-referrer');
    this.iframe.title = `Nsight profile ${name}`;
    this.node.append(this.iframe);
  }

  setPage(html: string): void {
    this.iframe.srcdoc = html;
  }

  readonly iframe: HTMLIFrameElement;
}
