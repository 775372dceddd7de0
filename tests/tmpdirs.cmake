# tests/tmpdirs.cmake — every ctest entry gets a temporary directory of its own.
# Open MPI keeps a session directory per host and user, $TMPDIR/ompi.<host>.<uid>, which every mpiexec
# creates at start and removes at exit when it is empty (meshpoint itself calls MPI_Init only under a
# launcher: docs/DESIGN_NOTES.md, "MPI only when launched by MPI"). Two processes starting and ending at once race on it (orte's
# opal_os_dirpath_create: mkdir fails with EEXIST because another process created it, and the stat that
# follows fails because a third one removed it again): "mkdir /tmp/ompi.vm.0: File exists",
# orte_session_dir failed, orte_init failed. ctest runs entries side by side (-j), so any run of the
# suite could lose that race; tests/mpi_session_race.sh reproduces it and shows a directory of one's own
# defeats it. Hence each entry runs with
#   TMPDIR                      = BUILD/tmp/<entry>   (mktemp, Criterion, Open MPI's default)
#   OMPI_MCA_orte_tmpdir_base   = the same            (wins over TMPDIR in Open MPI 4, should a user set it)
#   PRTE_MCA_prte_tmpdir_base   = the same            (Open MPI 5's runtime, PRRTE)
# and requires the fixture `tmpdirs` (entry tmpdirs_make, cmake/tmpdirs_make.cmake), which creates those
# directories when the tests run, not at configure time, so a cleaned /tmp or a fresh TMPDIR cannot
# leave an entry without one. tests/python/test_defs.py (entry test_definitions) checks, from ctest's
# own JSON listing, that every entry has a directory of its own. Deferred to the end of the top
# directory, like tests/sanitize.cmake, so it sees every entry whatever the order of the includes.
set(MP_TEST_TMP ${CMAKE_BINARY_DIR}/tmp)
function(mp_tmpdir_all_tests)
  get_property(tests DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY TESTS)
  set(dirs "")
  foreach(t ${tests})
    set(d ${MP_TEST_TMP}/${t})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "TMPDIR=${d}" "OMPI_MCA_orte_tmpdir_base=${d}" "PRTE_MCA_prte_tmpdir_base=${d}")
    set_property(TEST ${t} APPEND PROPERTY FIXTURES_REQUIRED tmpdirs)
    string(APPEND dirs "${d}\n")
  endforeach()
  file(WRITE ${MP_TEST_TMP}.list "${dirs}")
  add_test(NAME tmpdirs_make COMMAND ${CMAKE_COMMAND} -DLIST=${MP_TEST_TMP}.list
           -P ${CMAKE_SOURCE_DIR}/cmake/tmpdirs_make.cmake)
  set_tests_properties(tmpdirs_make PROPERTIES FIXTURES_SETUP tmpdirs LABELS unit TIMEOUT 60)
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL mp_tmpdir_all_tests)

# The check of the definitions above, and the race itself (both entries get their own TMPDIR too).
add_test(NAME test_definitions COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/test_defs.py ${CMAKE_BINARY_DIR})
set_tests_properties(test_definitions PROPERTIES LABELS unit TIMEOUT 120)
add_test(NAME mpi_session_race COMMAND ${CMAKE_SOURCE_DIR}/tests/mpi_session_race.sh $<TARGET_FILE:mpi_comm>)
set_tests_properties(mpi_session_race PROPERTIES LABELS mpi TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
