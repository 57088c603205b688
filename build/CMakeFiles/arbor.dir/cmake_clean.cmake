file(REMOVE_RECURSE
  "CMakeFiles/arbor.dir/src/main.c.o"
  "CMakeFiles/arbor.dir/src/main.c.o.d"
  "arbor"
  "arbor.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/arbor.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
