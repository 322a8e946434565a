"""`gpuburst … | head`: the reader leaving early is not an error, for every subcommand."""

import subprocess
import sys
import textwrap


def test_output_piped_into_head_ends_quietly(tmp_path) -> None:
    (tmp_path / "chatty.py").write_text(
        textwrap.dedent("""
        def main(argv):
            for i in range(200_000):
                print(f"line {i}: a report longer than anyone reads")
            return 0
    """)
    )
    code = (
        "import sys; from jupyter_gpuburst import cli; "
        "cli.SUBCOMMANDS['chatty'] = ('chatty', 'main', 'prints a lot'); "
        "sys.exit(cli.main(['chatty']))"
    )
    done = subprocess.run(
        f"{sys.executable} -c \"{code}\" | head -n 1",
        shell=True, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.stdout == "line 0: a report longer than anyone reads\n"
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
