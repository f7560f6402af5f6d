"""adakit: launch a read-only code-understanding agent (Ada) into real repositories,
record every run as a trajectory, and read the corpus through observation lenses."""

__version__ = "0.1.0"
