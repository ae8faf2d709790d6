# systemd (issue 13): the notify protocol and the watchdog from libsystemd
# (sd_notify, sd_watchdog_enabled: src/runtime/daemon_notify.c), the unit file
# (contrib/systemd/oopsd.service) and the test's datagram receiver
# (tests/tools/notify_sink.c, tests/integration/systemd.sh).
# Without NOTIFY_SOCKET in its environment, oopsd sends nothing.
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
target_link_libraries(oops_runtime PUBLIC PkgConfig::SYSTEMD)
target_compile_definitions(oops_runtime PRIVATE OOPS_HAVE_SYSTEMD=1)

# A unix datagram receiver standing in for systemd's notify socket.
add_executable(notify_sink tests/tools/notify_sink.c)

# The unit goes where systemd looks for a package's units, the EnvironmentFile
# (OOPS_DB without a password, flags) where the unit reads it: /lib/systemd/system
# and /etc/default/oopsd under prefix /usr (the package), else PREFIX/lib/systemd/system
# and PREFIX/etc/default/oopsd. Decided when installing, from the prefix in effect
# then (like the policies' CONFDIR, cmake/install.cmake), so `cmake --install
# --prefix X` writes nothing outside X (DESTDIR is honoured by file(INSTALL)).
install(CODE "
  if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\" OR CMAKE_INSTALL_PREFIX STREQUAL \"/usr/\")
    set(oops_unit_dir /lib/systemd/system)
    set(oops_etc /etc)
  else()
    set(oops_unit_dir \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
    set(oops_etc \"\${CMAKE_INSTALL_PREFIX}/etc\")
  endif()
  file(INSTALL DESTINATION \"\${oops_unit_dir}\" TYPE FILE
       FILES \"${CMAKE_SOURCE_DIR}/contrib/systemd/oopsd.service\")
  file(INSTALL DESTINATION \"\${oops_etc}/default\" TYPE FILE RENAME oopsd
       FILES \"${CMAKE_SOURCE_DIR}/contrib/systemd/oopsd.default\")
")
