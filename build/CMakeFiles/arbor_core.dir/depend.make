# Empty dependencies file for arbor_core.
# This may be replaced when dependencies are built.
