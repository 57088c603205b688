
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/events.c" "CMakeFiles/arbor_tree.dir/src/events.c.o" "gcc" "CMakeFiles/arbor_tree.dir/src/events.c.o.d"
  "/work/main/src/gc.c" "CMakeFiles/arbor_tree.dir/src/gc.c.o" "gcc" "CMakeFiles/arbor_tree.dir/src/gc.c.o.d"
  "/work/main/src/sched.c" "CMakeFiles/arbor_tree.dir/src/sched.c.o" "gcc" "CMakeFiles/arbor_tree.dir/src/sched.c.o.d"
  "/work/main/src/str.c" "CMakeFiles/arbor_tree.dir/src/str.c.o" "gcc" "CMakeFiles/arbor_tree.dir/src/str.c.o.d"
  "/work/main/src/tree.c" "CMakeFiles/arbor_tree.dir/src/tree.c.o" "gcc" "CMakeFiles/arbor_tree.dir/src/tree.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
