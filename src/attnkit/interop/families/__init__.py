"""The checkpoint families, one module each (see :mod:`attnkit.interop.family`).

Each module registers its family (or, for one architecture with variants, its families) once, with
:meth:`attnkit.interop.family.Family.register`; :func:`attnkit.interop.family.families` imports every
module of this package, so a new family is a new file here.
"""
