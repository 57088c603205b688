# Empty dependencies file for test_gc.
# This may be replaced when dependencies are built.
