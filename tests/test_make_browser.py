"""`make test` without a browser: tools/browser installs Chromium or names the command to run."""

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "browser"


def _path_with(tmp_path: Path, fakes: dict[str, str]) -> str:
    """A PATH holding bash and env, plus the given fake commands (name -> script body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    for name, body in fakes.items():
        fake = bin_dir / name
        fake.write_text("#!" + shutil.which("bash") + "\n" + body + "\n")
        fake.chmod(0o755)
    return str(bin_dir)


def _run(path: str) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("bash"), str(SCRIPT)], env={"PATH": path},
                          capture_output=True, text=True, timeout=60)


def test_a_machine_with_the_browser_passes_at_once(tmp_path):
    path = _path_with(tmp_path, {"chromium": "exit 0", "chromedriver": "exit 0", "id": "echo 1000"})
    done = _run(path)
    assert (done.returncode, done.stderr) == (0, "")


def test_a_user_without_root_is_told_the_one_command(tmp_path):
    path = _path_with(tmp_path, {"apt-get": "exit 0", "id": "echo 1000"})
    done = _run(path)
    assert done.returncode == 1
    assert "sudo apt-get update && sudo apt-get install -y chromium chromium-driver" in done.stderr


def test_a_machine_without_apt_is_told_what_to_install(tmp_path):
    path = _path_with(tmp_path, {"id": "echo 1000"})
    done = _run(path)
    assert done.returncode == 1
    assert "apt-get install chromium chromium-driver" in done.stderr
    assert "tests/test_html_report.py" in done.stderr


def test_root_installs_both_packages_with_apt(tmp_path):
    log = tmp_path / "apt.log"
    path = _path_with(tmp_path, {"apt-get": f'echo "$@" >> {log}', "id": "echo 0"})
    done = _run(path)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq chromium chromium-driver"]


def test_the_makefile_runs_it_before_the_tests():
    makefile = (SCRIPT.parents[1] / "Makefile").read_text()
    assert "test: $(STAMP) browser" in makefile and "\ttools/browser" in makefile
