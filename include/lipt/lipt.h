/* defines: the umbrella header of the lipt library: every public header. */
#ifndef LIPT_LIPT_H
#define LIPT_LIPT_H
#include "lipt/core.h"
#include "lipt/arena.h"
#include "lipt/tensor.h"
#include "lipt/autograd.h"
#include "lipt/params.h"
#include "lipt/ops.h"
#include "lipt/bounds.h"
#include "lipt/variants.h"
#include "lipt/config.h"
#include "lipt/model.h"
#include "lipt/invert.h"
#include "lipt/jacobian.h"
#include "lipt/decode.h"
#include "lipt/evaluate.h"
#include "lipt/optim.h"
#include "lipt/data.h"
#include "lipt/checkpoint.h"
#include "lipt/safetensors.h"
#include "lipt/dist.h"
#include "lipt/train.h"
#endif
