file(REMOVE_RECURSE
  "CMakeFiles/arbor_tree.dir/src/events.c.o"
  "CMakeFiles/arbor_tree.dir/src/events.c.o.d"
  "CMakeFiles/arbor_tree.dir/src/gc.c.o"
  "CMakeFiles/arbor_tree.dir/src/gc.c.o.d"
  "CMakeFiles/arbor_tree.dir/src/sched.c.o"
  "CMakeFiles/arbor_tree.dir/src/sched.c.o.d"
  "CMakeFiles/arbor_tree.dir/src/str.c.o"
  "CMakeFiles/arbor_tree.dir/src/str.c.o.d"
  "CMakeFiles/arbor_tree.dir/src/tree.c.o"
  "CMakeFiles/arbor_tree.dir/src/tree.c.o.d"
  "libarbor_tree.a"
  "libarbor_tree.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/arbor_tree.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
