// version.hpp: the program's version, printed by --version.
#pragma once
#define FACEGEN_VERSION "0.1.0"
