# ringcast_write_if_changed(PATH CONTENT): writes CONTENT to PATH only when it differs from what is
# there, so that a rerun of a generator script does not rebuild what includes its output. For the
# -P scripts that embed files into the binary (portal/embed_assets.cmake, api/embed_openapi.cmake).
function(ringcast_write_if_changed path content)
  if(EXISTS "${path}")
    file(READ "${path}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()
