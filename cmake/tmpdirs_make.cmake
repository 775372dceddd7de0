# cmake/tmpdirs_make.cmake — `cmake -DLIST=FILE -P cmake/tmpdirs_make.cmake`: creates each directory named
# by a line of FILE (the per-entry temporary directories of tests/tmpdirs.cmake). The setup of the ctest
# fixture `tmpdirs`, which every entry requires, so `ctest -R x` creates x's directory too. Existing
# directories and their contents are left as they are (another ctest of the same build may be using them).
file(STRINGS ${LIST} dirs)
foreach(d ${dirs})
  file(MAKE_DIRECTORY ${d})
endforeach()
list(LENGTH dirs n)
message(STATUS "tmpdirs_make: ${n} per-entry temporary directories present")
