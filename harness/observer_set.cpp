#include "harness/observer_set.h"
