# Empty dependencies file for arbor.
# This may be replaced when dependencies are built.
