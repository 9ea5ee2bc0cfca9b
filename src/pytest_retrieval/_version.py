"""The package version, in a leaf module: importing it never imports the package."""

__version__ = "0.1.0"
