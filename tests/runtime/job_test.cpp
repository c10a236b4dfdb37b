// What a run trains (runtime/job.h): the learning-rate schedule.

#include <gtest/gtest.h>

#include "runtime/job.h"

namespace {

TEST(LearningRate, WarmsUpLinearlyThenDecaysToTheMinimum) {
  pprt::TrainOptions o;
  o.steps = 101;
  o.lr = 1.0;
  o.warmup = 10;
  o.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 0), 0.1);
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 9), 1.0);
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 10), 1.0);
  EXPECT_NEAR(pprt::learning_rate(o, 55), 0.55,
              1e-12);  // half way through the decay (steps 10..100)
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 100), 0.1);
  for (int s = 11; s < 101; ++s)
    EXPECT_LT(pprt::learning_rate(o, s), pprt::learning_rate(o, s - 1));
}

}  // namespace
