"""OMP NInfer release pipeline.

One stage per module (build, package, sbom, image, push, qualify, compose,
verify, audit, sign, publish); stages exchange data only through the artefact
register in the output folder (pipeline.register).  Importing this package is
cheap on purpose: heavy libraries are imported by the stages that need them.
"""

__version__ = "0.1.0"
