"""Sphinx configuration of attnkit's documentation site (`make docs`; built offline, warnings are errors).

Pages are MyST Markdown; the tutorials are jupytext percent scripts (`tutorials/NN_*.py`) that myst-nb
executes at build time, so every figure and number on the site comes from the code as it is.
"""

from __future__ import annotations

import os

from attnkit import __version__

# One torch thread per notebook kernel (see docs/execute.py): fast and steady on a shared 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# tqdm (imported by Lightning's and Optuna's dependencies) notes in every kernel that ipywidgets is not
# installed; the site shows no progress bars, so that notice is not shown either.
os.environ.setdefault("PYTHONWARNINGS", "ignore:IProgress not found")

project = "attnkit"
author = "attnkit developers"
copyright = "2026, attnkit developers"
release = version = __version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",  # the docstrings are Google style (Args:, Returns:)
    "sphinx.ext.viewcode",
    "sphinx_click",
    "sphinx_copybutton",
]

# Only the pages and the tutorials are sources: build outputs and helper scripts are not.
# (A tutorial converted with `jupytext --to ipynb` lands beside its .py: the .py stays the source.)
exclude_patterns = [
    "_build",
    "conf.py",
    "execute.py",
    "check_site.py",
    "**/.ipynb_checkpoints",
    "jupyter_execute",
    "tutorials/*.ipynb",
]
nb_custom_formats = {".py": ["jupytext.reads", {"fmt": "py:percent"}]}
source_suffix = {".md": "myst-nb", ".py": "myst-nb"}

# Execute every tutorial on each build; any error fails the build with the cell's traceback.
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 300
nb_execution_in_temp = True
nb_merge_streams = True

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
# Methods that only override Lightning hooks keep Lightning's docstrings out of attnkit's reference.
autodoc_inherit_docstrings = False

html_theme = "furo"
html_title = f"attnkit {version}"
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"
# Nothing on the site is fetched from elsewhere: furo ships its own fonts-free CSS and scripts.
html_show_sourcelink = False
