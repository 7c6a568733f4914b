"""setuptools hook (the metadata is in pyproject.toml): the wheel carries the repository files `audit` and `rebuild` read.

`verify` and `audit` load the lane files (runtime/lanes/*.toml, with their cut ledgers runtime/cuts/*.json
where the repository has them), and loading a lane checks that the licence texts it names
(packaging/licenses/) exist; `rebuild --verify` also reads the toolchain lock, the nvcc launcher and the packaging
templates and Windows scripts the package stage puts in a set.  Those live in the repository, outside the package, and an
installed wheel (the verifier shipped with a release, `python -m pipeline verifier-dist`) has no repository,
so build_py copies them to pipeline/data/repo/<same path>, where pipeline.lanes looks when it does not run
from a checkout.  MANIFEST.in puts the same files in the sdist, so a wheel built from the sdist has them too.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# pattern -> must match at least one file (the cut ledgers beside the lanes come with the cut stage)
BUNDLED = {
    "runtime/lanes/*.toml": True,
    "packaging/licenses/*.txt": True,
    "runtime/cuts/*.json": False,
    # rebuild --verify from the installed verifier: the toolchain lock, the nvcc launcher, and what package makes a set from
    "runtime/toolchain.lock.json": True,
    "requirements/release.txt": True,  # the provenance names it by SHA-256 (a rebuild states it again)
    "runtime/launcher/*.py": True,
    "packaging/templates/*.in": True,
    "packaging/windows/*.ps1": True,
    "packaging/windows/lanes/*/*.json": True,
    # package derives the 5090 lane's base-image libraries from its package base (package.base_image): the
    # definition, its lock and the keyrings the definition pins by SHA-256
    "containers/*/*.toml": True,
    "containers/*/*.lock.json": True,
    "containers/keys/*.gpg": True,
}
TARGET = ("pipeline", "data", "repo")


class BuildPyWithRepositoryData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout itself
            return
        root = Path(__file__).resolve().parent
        target = Path(self.build_lib).joinpath(*TARGET)
        for pattern, required in BUNDLED.items():
            sources = sorted(root.glob(pattern))
            if required and not sources:
                raise SystemExit(f"setup.py: no file matches {pattern} under {root}: the verifier wheel would lack it")
            for source in sources:
                destination = target / source.relative_to(root)
                self.mkpath(str(destination.parent))
                self.copy_file(str(source), str(destination), preserve_mode=False)


setup(cmdclass={"build_py": BuildPyWithRepositoryData})
