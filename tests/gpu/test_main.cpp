// test_main.cpp: doctest's main for the GPU tests (build/facegen-gpu-tests).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
