"""The safe restart sequence: the steps in order, their bodies, the journal, the run lock."""
