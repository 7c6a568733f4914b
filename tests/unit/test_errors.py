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


# -- the one rule for text from documents and servers ------------------------------------------

HOSTILE = "ready\x1b[2K\x1b[1A\r\nPASSED\x7f\x85\x9b\u202e\u2066\u200b\u200d\ufeff\xa0\u2028\u2029\tend"


def test_printable_escapes_every_control_and_invisible_character():
    from pipeline.errors import printable

    shown = printable(HOSTILE)
    assert shown == "ready\\x1b[2K\\x1b[1A\\x0d\\x0aPASSED\\x7f\\x85\\x9b\\u202e\\u2066\\u200b\\u200d\\ufeff\\xa0\\u2028\\u2029\\x09end"
    assert shown.isprintable() and printable(shown) == shown, "idempotent: what it makes is printable"
    assert printable("a\tb\nc\x1b", lines=True) == "a\tb\nc\\x1b"  # a tool's output keeps its lines, never its escapes
    assert printable("Grüße 東京 e\u0301") == "Grüße 東京 e\u0301"  # printable text of any script is left alone


def test_quoted_marks_bounds_and_escapes_a_value():
    from pipeline.errors import QUOTE_LIMIT, quoted

    assert quoted("a\x1bb") == "'a\\x1bb'"
    long = quoted("x" * (QUOTE_LIMIT + 50))
    assert long == repr("x" * QUOTE_LIMIT) + " (and 50 more characters)"
    assert quoted(["\x1b[2K"]) == "['\\x1b[2K']"


def test_an_errors_found_part_and_message_carry_no_control_character():
    from pipeline.errors import QUOTE_LIMIT, InputError

    error = InputError(f"unexpected status {HOSTILE}", file="manifest.json", field="status", found=HOSTILE * 20, fix="use a status the release tree defines")
    text = error.render()
    assert "\x1b" not in text and "\u202e" not in text and "\r" not in text and "\x85" not in text
    found = text[text.index("(found ") :]
    assert f"(and {len(HOSTILE) * 20 - QUOTE_LIMIT} more characters)" in found and len(found) < QUOTE_LIMIT * 10 + 100, "the found part is bounded"


def test_ui_lines_and_results_carry_no_control_character(capsys):
    from pipeline.util import ui

    ui.info(f"a file named {HOSTILE}")
    ui.result(f"OK: {HOSTILE}")
    captured = capsys.readouterr()
    assert "\x1b" not in captured.err + captured.out and "\u202e" not in captured.err + captured.out
    assert captured.out.count("\n") == 1, "a result is one line whatever its data"


def test_a_urls_user_information_is_redacted_wherever_it_is_printed():
    from pipeline.errors import RemoteError, redact, redact_url_credentials

    assert redact_url_credentials("https://user:s3cret@example.com/a") == "https://[REDACTED]@example.com/a"
    assert redact_url_credentials("http://u:p@ss@host:8080/x?next=a@b") == "http://[REDACTED]@host:8080/x?next=a@b"
    assert redact_url_credentials("HTTPS://token@Host/") == "HTTPS://[REDACTED]@Host/"
    assert redact_url_credentials("mail a@b.c or git@github.com:o/r; https://host/p@x") == "mail a@b.c or git@github.com:o/r; https://host/p@x"
    assert redact("fetch http://user:PW@127.0.0.1:9/m.json failed") == "fetch http://[REDACTED]@127.0.0.1:9/m.json failed"
    error = RemoteError("cannot download m.json", file="http://user:PW@127.0.0.1:9/m.json", found="http://a:PW@h/")
    assert "PW" not in error.render() and "PW" not in str(error.as_dict())
