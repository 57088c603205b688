# CMake generated Testfile for 
# Source directory: /work/main
# Build directory: /work/main/build
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[c_tree]=] "/work/main/build/test_tree")
set_tests_properties([=[c_tree]=] PROPERTIES  TIMEOUT "120" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;69;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[c_gc]=] "/work/main/build/test_gc")
set_tests_properties([=[c_gc]=] PROPERTIES  TIMEOUT "120" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;69;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[c_model]=] "/work/main/build/test_model")
set_tests_properties([=[c_model]=] PROPERTIES  TIMEOUT "120" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;69;add_test;/work/main/CMakeLists.txt;0;")
