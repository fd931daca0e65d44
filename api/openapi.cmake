# docs/openapi.yaml as JSON compiled into the binary (api/openapi.h), for the api module and the
# fuzz build alike: ringcast_openapi_json(<var>) sets <var> to the generated C++ source. Two
# steps: tools/yaml2json.py converts the YAML (python3 with python3-yaml, tools/install-deps.sh
# runtime; it refuses duplicate keys and dangling $refs), then api/embed_openapi.cmake writes the
# JSON's bytes into the source.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
execute_process(COMMAND ${Python3_EXECUTABLE} -c "import yaml" RESULT_VARIABLE ringcast_yaml_missing
                OUTPUT_QUIET ERROR_QUIET)
if(ringcast_yaml_missing)
  message(FATAL_ERROR "PyYAML is missing for ${Python3_EXECUTABLE}: the build converts "
                      "docs/openapi.yaml to JSON (Debian: python3-yaml; tools/install-deps.sh runtime)")
endif()

function(ringcast_openapi_json out_var)
  set(yaml ${PROJECT_SOURCE_DIR}/docs/openapi.yaml)
  set(json ${CMAKE_CURRENT_BINARY_DIR}/openapi.json)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/openapi_json.cc)
  add_custom_command(
    OUTPUT ${json} ${out}
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/yaml2json.py ${yaml} ${json}
    COMMAND ${CMAKE_COMMAND} -DIN=${json} -DOUT=${out} -P ${PROJECT_SOURCE_DIR}/api/embed_openapi.cmake
    DEPENDS ${yaml} ${PROJECT_SOURCE_DIR}/tools/yaml2json.py
            ${PROJECT_SOURCE_DIR}/api/embed_openapi.cmake
    COMMENT "Embedding docs/openapi.yaml as JSON"
    VERBATIM)
  set(${out_var} ${out} PARENT_SCOPE)
endfunction()
