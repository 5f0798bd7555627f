package profiles

import "slices"

// TorchvisionModel is a torchvision image classifier with its published
// parameter count.
type TorchvisionModel struct {
	// Name is the torchvision builder name, which is also the model name
	// of the RaPP measurements and of the built-in profiles.
	Name string
	// Params is num_params from the model's default ImageNet weights.
	Params int64
	// Source is the file whose weights metadata gives Params.
	Source string
}

// torchvisionModels lists the 69 models of the RaPP table. Params is the
// "num_params" entry of each model's <Model>_Weights metadata in
// torchvision (the "Params" column of the torchvision model docs).
func torchvisionModels() []TorchvisionModel {
	const src = "torchvision/models/"
	return []TorchvisionModel{
		{"alexnet", 61100840, src + "alexnet.py AlexNet_Weights"},
		{"convnext_base", 88591464, src + "convnext.py ConvNeXt_Base_Weights"},
		{"convnext_large", 197767336, src + "convnext.py ConvNeXt_Large_Weights"},
		{"convnext_small", 50223688, src + "convnext.py ConvNeXt_Small_Weights"},
		{"convnext_tiny", 28589128, src + "convnext.py ConvNeXt_Tiny_Weights"},
		{"densenet121", 7978856, src + "densenet.py DenseNet121_Weights"},
		{"densenet161", 28681000, src + "densenet.py DenseNet161_Weights"},
		{"densenet169", 14149480, src + "densenet.py DenseNet169_Weights"},
		{"densenet201", 20013928, src + "densenet.py DenseNet201_Weights"},
		{"efficientnet_b0", 5288548, src + "efficientnet.py EfficientNet_B0_Weights"},
		{"efficientnet_b1", 7794184, src + "efficientnet.py EfficientNet_B1_Weights"},
		{"efficientnet_b2", 9109994, src + "efficientnet.py EfficientNet_B2_Weights"},
		{"efficientnet_b3", 12233232, src + "efficientnet.py EfficientNet_B3_Weights"},
		{"efficientnet_b4", 19341616, src + "efficientnet.py EfficientNet_B4_Weights"},
		{"efficientnet_b5", 30389784, src + "efficientnet.py EfficientNet_B5_Weights"},
		{"efficientnet_b6", 43040704, src + "efficientnet.py EfficientNet_B6_Weights"},
		{"efficientnet_b7", 66347960, src + "efficientnet.py EfficientNet_B7_Weights"},
		{"efficientnet_v2_l", 118515272, src + "efficientnet.py EfficientNet_V2_L_Weights"},
		{"efficientnet_v2_m", 54139356, src + "efficientnet.py EfficientNet_V2_M_Weights"},
		{"efficientnet_v2_s", 21458488, src + "efficientnet.py EfficientNet_V2_S_Weights"},
		{"googlenet", 6624904, src + "googlenet.py GoogLeNet_Weights"},
		{"inception_v3", 27161264, src + "inception.py Inception_V3_Weights"},
		{"maxvit_t", 30919624, src + "maxvit.py MaxVit_T_Weights"},
		{"mnasnet0_5", 2218512, src + "mnasnet.py MNASNet0_5_Weights"},
		{"mnasnet0_75", 3170208, src + "mnasnet.py MNASNet0_75_Weights"},
		{"mnasnet1_0", 4383312, src + "mnasnet.py MNASNet1_0_Weights"},
		{"mnasnet1_3", 6282256, src + "mnasnet.py MNASNet1_3_Weights"},
		{"mobilenet_v2", 3504872, src + "mobilenetv2.py MobileNet_V2_Weights"},
		{"mobilenet_v3_large", 5483032, src + "mobilenetv3.py MobileNet_V3_Large_Weights"},
		{"mobilenet_v3_small", 2542856, src + "mobilenetv3.py MobileNet_V3_Small_Weights"},
		{"regnet_x_16gf", 54278536, src + "regnet.py RegNet_X_16GF_Weights"},
		{"regnet_x_1_6gf", 9190136, src + "regnet.py RegNet_X_1_6GF_Weights"},
		{"regnet_x_32gf", 107811560, src + "regnet.py RegNet_X_32GF_Weights"},
		{"regnet_x_3_2gf", 15296552, src + "regnet.py RegNet_X_3_2GF_Weights"},
		{"regnet_x_400mf", 5495976, src + "regnet.py RegNet_X_400MF_Weights"},
		{"regnet_x_800mf", 7259656, src + "regnet.py RegNet_X_800MF_Weights"},
		{"regnet_x_8gf", 39572648, src + "regnet.py RegNet_X_8GF_Weights"},
		{"regnet_y_128gf", 644812894, src + "regnet.py RegNet_Y_128GF_Weights"},
		{"regnet_y_16gf", 83590140, src + "regnet.py RegNet_Y_16GF_Weights"},
		{"regnet_y_1_6gf", 11202430, src + "regnet.py RegNet_Y_1_6GF_Weights"},
		{"regnet_y_32gf", 145046770, src + "regnet.py RegNet_Y_32GF_Weights"},
		{"regnet_y_3_2gf", 19436338, src + "regnet.py RegNet_Y_3_2GF_Weights"},
		{"regnet_y_400mf", 4344144, src + "regnet.py RegNet_Y_400MF_Weights"},
		{"regnet_y_800mf", 6432512, src + "regnet.py RegNet_Y_800MF_Weights"},
		{"regnet_y_8gf", 39381472, src + "regnet.py RegNet_Y_8GF_Weights"},
		{"resnet101", 44549160, src + "resnet.py ResNet101_Weights"},
		{"resnet152", 60192808, src + "resnet.py ResNet152_Weights"},
		{"resnet18", 11689512, src + "resnet.py ResNet18_Weights"},
		{"resnet34", 21797672, src + "resnet.py ResNet34_Weights"},
		{"resnet50", 25557032, src + "resnet.py ResNet50_Weights"},
		{"resnext101_32x8d", 88791336, src + "resnet.py ResNeXt101_32X8D_Weights"},
		{"resnext101_64x4d", 83455272, src + "resnet.py ResNeXt101_64X4D_Weights"},
		{"resnext50_32x4d", 25028904, src + "resnet.py ResNeXt50_32X4D_Weights"},
		{"shufflenet_v2_x0_5", 1366792, src + "shufflenetv2.py ShuffleNet_V2_X0_5_Weights"},
		{"shufflenet_v2_x1_0", 2278604, src + "shufflenetv2.py ShuffleNet_V2_X1_0_Weights"},
		{"shufflenet_v2_x1_5", 3503624, src + "shufflenetv2.py ShuffleNet_V2_X1_5_Weights"},
		{"shufflenet_v2_x2_0", 7393996, src + "shufflenetv2.py ShuffleNet_V2_X2_0_Weights"},
		{"squeezenet1_0", 1248424, src + "squeezenet.py SqueezeNet1_0_Weights"},
		{"squeezenet1_1", 1235496, src + "squeezenet.py SqueezeNet1_1_Weights"},
		{"vgg11", 132863336, src + "vgg.py VGG11_Weights"},
		{"vgg11_bn", 132868840, src + "vgg.py VGG11_BN_Weights"},
		{"vgg13", 133047848, src + "vgg.py VGG13_Weights"},
		{"vgg13_bn", 133053736, src + "vgg.py VGG13_BN_Weights"},
		{"vgg16", 138357544, src + "vgg.py VGG16_Weights"},
		{"vgg16_bn", 138365992, src + "vgg.py VGG16_BN_Weights"},
		{"vgg19", 143667240, src + "vgg.py VGG19_Weights"},
		{"vgg19_bn", 143678248, src + "vgg.py VGG19_BN_Weights"},
		{"wide_resnet101_2", 126886696, src + "resnet.py Wide_ResNet101_2_Weights"},
		{"wide_resnet50_2", 68883240, src + "resnet.py Wide_ResNet50_2_Weights"},
	}
}

// TorchvisionModels lists the torchvision models faas-gpu knows the
// parameter count of, sorted by name.
func TorchvisionModels() []TorchvisionModel {
	return torchvisionModels()
}

// LookupTorchvision returns the torchvision model called name.
func LookupTorchvision(name string) (TorchvisionModel, bool) {
	models := torchvisionModels()
	i, ok := slices.BinarySearchFunc(models, name, func(m TorchvisionModel, n string) int {
		switch {
		case m.Name < n:
			return -1
		case m.Name > n:
			return 1
		}
		return 0
	})
	if !ok {
		return TorchvisionModel{}, false
	}
	return models[i], true
}
