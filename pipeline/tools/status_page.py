"""The status as one self-contained static HTML page (`status --html FILE`).

No script, no external resource (no link, image, font or frame: the page opens offline and from a
workflow artifact), inline CSS only, every text from data escaped (lane names, messages and
blockers are data, and data is hostile), and the same status gives the same bytes (no clock,
sorted input, LF).
"""

from __future__ import annotations

import html

from pipeline.errors import redact
from pipeline.tools.status_model import COLUMNS, Cell, ReleaseStatus, Status


def escape(text: str) -> str:
    """Text from data on the page: without a secret or a URL's password (`redact`), then HTML-escaped."""
    return html.escape(redact(text))


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d232a;margin:24px;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}p.sub{color:#56606b;margin:0 0 16px}
table{border-collapse:collapse;margin:0 0 8px}th,td{border:1px solid #d5dae0;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f7;font-weight:600}td.lane{font-weight:600;white-space:nowrap}td.lane small{display:block;font-weight:400;color:#56606b}
td.cell{max-width:260px;overflow-wrap:anywhere}
.s-done,.s-up{background:#e5f5e8}.s-stale{background:#fff3d6}.s-missing{background:#f4f5f7;color:#56606b}
.s-skipped{background:#fafbfc;color:#77808a}.s-refused{background:#fde4e4}
.state{font-weight:600;white-space:nowrap}.why{display:block;font-size:12px}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f2f4f7;padding:1px 3px;overflow-wrap:anywhere}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;background:#e8ecf1}
.badge.ready{background:#d3f0da}.badge.candidate{background:#dbe9fb}.badge.draft{background:#fff0c7}
ol.blockers li{margin:0 0 8px;max-width:1100px;overflow-wrap:anywhere}
"""

_STATE_CLASS = {"done": "s-done", "up to date": "s-up", "stale": "s-stale", "missing": "s-missing", "skipped": "s-skipped", "refused": "s-refused"}


def _cell(cell: Cell) -> str:
    head = cell.text.split(":", 1)[0] if cell.state not in ("done",) else cell.text.split(" (", 1)[0]
    detail = cell.detail
    if cell.state == "up to date" and cell.digest:
        detail = cell.digest[:12]
    why = f'<span class="why">{escape(detail)}</span>' if detail else ""
    return f'<td class="cell {_STATE_CLASS.get(cell.state, "")}"><span class="state">{escape(head)}</span>{why}</td>'


def _lanes_table(status: Status) -> list[str]:
    stages = [c[0] for c in COLUMNS]
    out = ["<table>", "<thead><tr><th>lane</th><th>current cut</th>" + "".join(f"<th>{escape(s)}</th>" for s in stages) + "</tr></thead>", "<tbody>"]
    for row in status.lanes:
        cut = f"{escape(row.cut_tag)}<small>{escape(row.cut_state or '')}</small>" if row.cut_tag else "(not cut)"
        cut += f"<small>CI {escape(row.ci)}</small>" if row.ci else ""  # the CI at the cut's commit, where a record keeps it
        cells = "".join(_cell(row.cells[s]) for s in stages)
        out.append(f'<tr><td class="lane">{escape(row.lane)}<small>{escape(row.kind)}</small></td><td class="lane">{cut}</td>{cells}</tr>')
    out += ["</tbody>", "</table>"]
    return out


def _release(release: ReleaseStatus) -> list[str]:
    state = escape(release.state)
    out = [f'<h2>Release {escape(release.release)} <span class="badge {state}">{state}</span></h2>',
           f"<p>External-installation acceptance: {escape(release.acceptance)}</p>", f"<p>Reviews: {escape(release.reviews)}</p>"]
    if release.routes:
        out += ["<table>", "<thead><tr><th>acceptance route</th><th>host</th><th>lane</th><th>receipts</th></tr></thead>", "<tbody>"]
        for route in release.routes:
            receipts = "<br>".join(escape(r) for r in route.receipts) or "no receipt"
            out.append(f"<tr><td><code>{escape(route.route)}</code></td><td>{escape(route.host)}</td><td>{escape(route.lane or '-')}</td><td>{receipts}</td></tr>")
        out += ["</tbody>", "</table>"]
    for key, message in release.refusals:
        out.append(f'<p class="s-refused">refused <code>{escape(key)}</code>: {escape(message)}</p>')
    out.append(f"<h2>Blockers ({len(release.blockers)})</h2>")
    if release.blockers:
        out.append('<ol class="blockers">')
        out += [f"<li>{escape(b.text)}<br>clear: <code>{escape(b.fix)}</code></li>" for b in release.blockers]
        out.append("</ol>")
    else:
        out.append("<p>None.</p>")
    return out


def _github(github: dict) -> list[str]:
    rows = []
    if github.get("product"):
        rows.append(github["product"])
    rows += [github["components"][lane] for lane in sorted(github.get("components") or {})]
    out = ["<h2>GitHub (read only)</h2>", "<table>", "<thead><tr><th>repository</th><th>tag</th><th>state</th></tr></thead>", "<tbody>"]
    out += [f"<tr><td>{escape(str(r.get('repository')))}</td><td>{escape(str(r.get('tag')))}</td><td>{escape(str(r.get('state')))}</td></tr>" for r in rows]
    return [*out, "</tbody>", "</table>"]


def render_page(status: Status) -> bytes:
    title = "OMP NInfer release status" + (f": {status.release.release}" if status.release else "")
    body = [f"<h1>{escape(title)}</h1>", '<p class="sub">Read from the artefact register, the cut ledgers and the release tree; no stage was run.</p>',
            *_lanes_table(status)]
    if status.release is not None:
        body += _release(status.release)
    if status.github:
        body += _github(status.github)
    page = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        # A page from a workflow artifact may be opened anywhere: it may load nothing and run nothing.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{_CSS.strip()}</style>",
        "</head>",
        "<body>",
        *body,
        "</body>",
        "</html>",
    ]
    return ("\n".join(page) + "\n").encode("utf-8")
