# Empty dependencies file for arbor_tree.
# This may be replaced when dependencies are built.
