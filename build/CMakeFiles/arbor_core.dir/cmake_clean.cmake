file(REMOVE_RECURSE
  "CMakeFiles/arbor_core.dir/src/l_core.c.o"
  "CMakeFiles/arbor_core.dir/src/l_core.c.o.d"
  "CMakeFiles/arbor_core.dir/src/l_ctx.c.o"
  "CMakeFiles/arbor_core.dir/src/l_ctx.c.o.d"
  "CMakeFiles/arbor_core.dir/src/l_engine.c.o"
  "CMakeFiles/arbor_core.dir/src/l_engine.c.o.d"
  "CMakeFiles/arbor_core.dir/src/processor.c.o"
  "CMakeFiles/arbor_core.dir/src/processor.c.o.d"
  "libarbor_core.a"
  "libarbor_core.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/arbor_core.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
