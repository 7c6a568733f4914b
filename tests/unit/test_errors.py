"""How failures are shown (pipeline/errors.py)."""

from __future__ import annotations

import os

from pipeline.errors import RemoteError


def test_a_url_is_shown_as_written_and_a_path_relative_to_the_working_folder(tmp_path, monkeypatch):
    # Seen in the registry-client harness's refusals: a URL passed as `file` was shown as a path under the
    # working folder, 'https:/ghcr.io/v2/…' (one slash lost), because Path() collapses '//'.
    monkeypatch.chdir(tmp_path)
    assert RemoteError("refused", file="https://ghcr.io/v2/alphastorm/x/manifests/latest").render() == "https://ghcr.io/v2/alphastorm/x/manifests/latest: refused."
    assert RemoteError("refused", file="http://127.0.0.1:5000/v2/").render().startswith("http://127.0.0.1:5000/v2/: ")
    (tmp_path / "dist").mkdir()
    assert RemoteError("refused", file=str(tmp_path / "dist" / "register.json")).render() == f"dist{os.sep}register.json: refused."
