/* The test hook of the certificates' outward rounding (core/outward.h). */
#include "core/outward.h"

int lipt_outward_test_nearest = 0;
