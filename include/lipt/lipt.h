/* defines: the umbrella header of the lipt library. */
#ifndef LIPT_LIPT_H
#define LIPT_LIPT_H
#include "lipt/core.h"
#include "lipt/tensor.h"
#include "lipt/autograd.h"
#include "lipt/params.h"
#include "lipt/ops.h"
#endif
