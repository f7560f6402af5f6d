"""The interactive workbench: the run explorer, the labelling mode, its labels and the tour's exercises."""
