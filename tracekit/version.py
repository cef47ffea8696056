"""tracekit's version, in its own module so that every layer can name it without importing the
package root (which re-exports the API of the layers above)."""

__version__ = "0.1.0"
