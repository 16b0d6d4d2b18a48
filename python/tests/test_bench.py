"""python -m edgemu.bench runs (figures are the machine's; only the shape is checked)."""

import json
import subprocess


def test_the_benchmark_prints_both_environments(python):
    r = subprocess.run(
        [python, "-m", "edgemu.bench", "--repair-steps", "300", "--lyreo-slots", "6",
         "--users", "6", "--servers", "3", "--vec", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(r.stdout)
    assert [row["unit"] for row in rows] == ["steps/s", "slots/s"]
    assert rows[1]["env"] == "LyreoScheduling-v0 (U=6, S=3)"
    for row in rows:
        assert row["rust"] > 0 and row["python"] > 0 and row["vector"] > 0
