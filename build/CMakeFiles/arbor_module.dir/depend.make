# Empty dependencies file for arbor_module.
# This may be replaced when dependencies are built.
