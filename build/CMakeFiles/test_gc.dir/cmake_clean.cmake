file(REMOVE_RECURSE
  "CMakeFiles/test_gc.dir/spec/c/test_gc.c.o"
  "CMakeFiles/test_gc.dir/spec/c/test_gc.c.o.d"
  "test_gc"
  "test_gc.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_gc.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
