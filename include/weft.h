// weft.h — umbrella header: everything a user of weft needs.
#ifndef WEFT_H
#define WEFT_H

#include "weft/core.h"
#include "weft/device.h"
#include "weft/tensor.h"
#include "weft/ops.h"
#include "weft/autograd.h"
#include "weft/nn.h"
#include "weft/data.h"
#include "weft/io.h"
#include "weft/model.h"
#include "weft/optim.h"
#include "weft/train.h"
#include "weft/dist.h"
#include "weft/ddp.h"
#include "weft/ps.h"
#include "weft/parallel.h"
#include "weft/graph.h"
#include "weft/graph_passes.h"
#include "weft/queue.h"
#include "weft/kgen.h"

#endif
