# The one place the version is written: setup.py reads this file as text (it cannot import
# pointops, which needs the compiled extension) and pointops/__init__.py imports it.
__version__ = "0.1.0"
