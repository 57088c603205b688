file(REMOVE_RECURSE
  "CMakeFiles/arbor_module.dir/src/l_core.c.o"
  "CMakeFiles/arbor_module.dir/src/l_core.c.o.d"
  "CMakeFiles/arbor_module.dir/src/l_ctx.c.o"
  "CMakeFiles/arbor_module.dir/src/l_ctx.c.o.d"
  "CMakeFiles/arbor_module.dir/src/l_engine.c.o"
  "CMakeFiles/arbor_module.dir/src/l_engine.c.o.d"
  "CMakeFiles/arbor_module.dir/src/processor.c.o"
  "CMakeFiles/arbor_module.dir/src/processor.c.o.d"
  "lua/arbor/core.pdb"
  "lua/arbor/core.so"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/arbor_module.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
