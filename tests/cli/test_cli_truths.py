"""What the command line says is what it does: the ingest note counts the logs that
were ingested only, and an existing store's encoder is kept as ``--help`` says."""

from __future__ import annotations

import json

from click.testing import CliRunner

from osumem.cli import main


def _logs(n: int) -> list:
    return [
        {
            "traj": [
                {"role": "system", "content": "policy"},
                {"role": "user", "content": f"task {k}"},
            ]
        }
        for k in range(n)
    ]


def test_ingest_note_counts_only_the_logs_ingested(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(_logs(5)))
    args = ["ingest", str(path), "--store", str(tmp_path / "m.db"), "--encoder", "hashing"]
    out = CliRunner().invoke(main, [*args, "--limit", "1"])
    assert out.exit_code == 0, out.output
    assert "ingested 1 log(s)" in out.stdout
    assert "1 system prompt (not a step)" in out.stderr and "5 system" not in out.stderr


def test_an_existing_store_keeps_its_encoder(tmp_path):
    path = tmp_path / "log.json"
    path.write_text(json.dumps(_logs(1)[0]))
    store = ["--store", str(tmp_path / "m.db")]
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", str(path), *store, "--encoder", "hashing"]).exit_code == 0
    again = runner.invoke(main, ["ingest", str(path), *store, "--namespace", "b"])  # no --encoder
    assert again.exit_code == 0, again.output
    assert "encoder hashing" in again.stdout
    other = runner.invoke(main, ["ingest", str(path), *store, "--encoder", "hashing:d64"])
    assert other.exit_code == 2 and "made with encoder" in other.stderr
    helptext = " ".join(runner.invoke(main, ["ingest", "--help"]).stdout.split())
    assert "An existing store uses the one it was made with" in helptext
    assert "naming another one is an error" in helptext
